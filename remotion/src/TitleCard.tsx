import {
	AbsoluteFill,
	interpolate,
	spring,
	useCurrentFrame,
	useVideoConfig,
} from 'remotion';
import {z} from 'zod';
import {metadataFromSeconds} from './validate-props';

export const titleCardSchema = z.object({
	title: z.string().min(1),
	subtitle: z.string(),
	accentColor: z.string(),
	seconds: z.number().positive().max(600),
});

export type TitleCardProps = z.infer<typeof titleCardSchema>;

// Duration comes from props.seconds (default 3 s => 90 frames at 30 fps).
export const titleCardMetadata = metadataFromSeconds<TitleCardProps>('TitleCard', titleCardSchema);

export const TitleCard: React.FC<TitleCardProps> = ({
	title,
	subtitle,
	accentColor,
}) => {
	const frame = useCurrentFrame();
	const {fps, durationInFrames} = useVideoConfig();

	const enter = spring({frame, fps, config: {damping: 200}});
	const barWidth = interpolate(enter, [0, 1], [0, 420]);
	const subtitleOpacity = interpolate(frame, [10, 25], [0, 1], {
		extrapolateLeft: 'clamp',
		extrapolateRight: 'clamp',
	});
	const fadeOut = interpolate(
		frame,
		[Math.max(0, durationInFrames - 10), durationInFrames],
		[1, 0],
		{extrapolateLeft: 'clamp', extrapolateRight: 'clamp'},
	);

	return (
		<AbsoluteFill
			style={{
				backgroundColor: '#0f172a',
				justifyContent: 'center',
				alignItems: 'center',
				fontFamily: 'Liberation Sans, DejaVu Sans, Arial, sans-serif',
				opacity: fadeOut,
			}}
		>
			<div
				style={{
					color: 'white',
					fontSize: 80,
					fontWeight: 700,
					textAlign: 'center',
					maxWidth: 1100,
					transform: `translateY(${interpolate(enter, [0, 1], [40, 0])}px)`,
					opacity: enter,
				}}
			>
				{title}
			</div>
			<div
				style={{
					height: 8,
					width: barWidth,
					backgroundColor: accentColor,
					borderRadius: 4,
					margin: '28px 0',
				}}
			/>
			<div
				style={{
					color: '#cbd5e1',
					fontSize: 40,
					textAlign: 'center',
					maxWidth: 1100,
					opacity: subtitleOpacity,
				}}
			>
				{subtitle}
			</div>
		</AbsoluteFill>
	);
};
