import {Composition} from 'remotion';
import {DataRecap, dataRecapSchema, dataRecapMetadata} from './DataRecap';
import {Failing} from './Failing';
import {Tiny, tinyMetadata} from './Tiny';
import {TitleCard, titleCardSchema, titleCardMetadata} from './TitleCard';

// All compositions read their inputProps; defaultProps must always be valid
// so that a job without props renders something sensible.
export const RemotionRoot: React.FC = () => {
	return (
		<>
			<Composition
				id="TitleCard"
				component={TitleCard}
				schema={titleCardSchema}
				width={1280}
				height={720}
				fps={30}
				durationInFrames={90}
				defaultProps={{
					title: 'spoolrender',
					subtitle: 'Batch renders from a spool directory',
					accentColor: '#4f8cff',
					seconds: 3,
				}}
				calculateMetadata={titleCardMetadata}
			/>
			<Composition
				id="DataRecap"
				component={DataRecap}
				schema={dataRecapSchema}
				width={1280}
				height={720}
				fps={30}
				durationInFrames={90}
				defaultProps={{
					title: 'Weekly recap',
					items: [
						{label: 'Mon', value: 12},
						{label: 'Tue', value: 19},
						{label: 'Wed', value: 7},
						{label: 'Thu', value: 23},
						{label: 'Fri', value: 15},
					],
					accentColor: '#22c55e',
					unit: '',
					seconds: 3,
				}}
				calculateMetadata={dataRecapMetadata}
			/>
			<Composition
				id="Tiny"
				component={Tiny}
				width={160}
				height={90}
				fps={30}
				durationInFrames={12}
				defaultProps={{frames: 12, color: '#e11d48'}}
				calculateMetadata={tinyMetadata}
			/>
			<Composition
				id="Failing"
				component={Failing}
				width={160}
				height={90}
				fps={30}
				durationInFrames={10}
				defaultProps={{atFrame: 0, reason: 'requested by test'}}
			/>
		</>
	);
};
